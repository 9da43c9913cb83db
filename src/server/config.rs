//! The flags of `gpuq serve`, `gpuq user add` and the database: one clap struct each, every flag
//! also readable from `GPUQ_*`. A leaf: it imports nothing of the crate, and what the flags mean is
//! decided where they are used.

use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Where the database is: an external server, or the embedded cluster under the data directory.
#[derive(Debug, Clone, Args)]
pub struct DbArgs {
    /// Directory for gpuq's state: the embedded Postgres cluster (`pg/`), logs.
    #[arg(long, env = "GPUQ_DATA_DIR", default_value = "./gpuq-data")]
    pub data_dir: PathBuf,
    /// Postgres URL. Without it gpuq runs its own cluster under `<data-dir>/pg`.
    #[arg(long, env = "GPUQ_DATABASE_URL")]
    pub database_url: Option<String>,
    /// With an external `--database-url`: the Postgres URL of the role the running server connects
    /// as. gpuq migrates with `--database-url` (the schema's owner), grants this role what the
    /// application needs, and nothing that can change or silence the append-only audit tables.
    /// The embedded cluster makes and uses such a role (`gpuq_app`) itself.
    #[arg(long, env = "GPUQ_APP_DATABASE_URL", requires = "database_url")]
    pub app_database_url: Option<String>,
    /// Unprivileged system user that runs the embedded Postgres when gpuq runs as root.
    #[arg(long, env = "GPUQ_PG_USER", default_value = "postgres")]
    pub pg_user: String,
    /// Largest number of pooled database connections.
    #[arg(long, env = "GPUQ_DB_MAX_CONNECTIONS", default_value_t = 16)]
    pub db_max_connections: u32,
}

/// Flags of `gpuq serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address and port the web UI and API listen on.
    #[arg(long, env = "GPUQ_LISTEN", default_value = "127.0.0.1:3000")]
    pub listen: SocketAddr,
    /// Database location.
    #[command(flatten)]
    pub db: DbArgs,
    /// Serve the browser bundle (`pkg/`, static files) from this folder, e.g. `target/site` while
    /// developing. Without it gpuq serves the bundle built into its binary.
    #[arg(long, env = "GPUQ_SITE_ROOT")]
    pub site_root: Option<PathBuf>,
    /// Password for the `admin` user created on first start. When unset, a random one is written to
    /// `<data-dir>/bootstrap-admin-password` (mode 0600) and the log says where, not what.
    #[arg(long, env = "GPUQ_BOOTSTRAP_ADMIN_PASSWORD", hide_env_values = true)]
    pub bootstrap_admin_password: Option<String>,
    /// Name of this node: the cards this process manages and the containers it runs belong to it.
    #[arg(long, env = "GPUQ_NODE", default_value_t = default_node())]
    pub node: String,
    /// Where cards come from: `auto` (simulated if --sim-gpus is given, else NVML), `nvml`, `sim`.
    #[arg(long, env = "GPUQ_GPU_SOURCE", default_value = "auto")]
    pub gpu_source: String,
    /// The old name of `--gpu-source`, still accepted (with a warning) so existing unit files keep
    /// working. `GPUQ_GPUS` is not read: it is the list of a job's cards inside its container.
    #[arg(long = "gpus", hide = true, conflicts_with = "gpu_source")]
    pub gpus_deprecated: Option<String>,
    /// Simulated cards, e.g. `3x24576:NVIDIA GeForce RTX 3090,1x81920:NVIDIA A100 80GB`.
    #[arg(long, env = "GPUQ_SIM_GPUS")]
    pub sim_gpus: Option<String>,
    /// VRAM kept free on every card (MiB) for the driver and fragmentation.
    #[arg(long, env = "GPUQ_VRAM_HEADROOM_MIB", default_value_t = 256)]
    pub vram_headroom_mib: i64,
    /// A job queued longer than this (seconds) holds the cards it waits for.
    #[arg(long, env = "GPUQ_STARVATION_AFTER_S", default_value_t = 1800)]
    pub starvation_after_s: u64,
    /// Backstop interval of admission passes (milliseconds); NOTIFY triggers them sooner.
    #[arg(long, env = "GPUQ_PASS_INTERVAL_MS", default_value_t = 2000)]
    pub pass_interval_ms: u64,
    /// How often the GPU inventory is re-read (seconds).
    #[arg(long, env = "GPUQ_GPU_REFRESH_S", default_value_t = 10)]
    pub gpu_refresh_s: u64,
    /// How often each card of this node is sampled for the usage charts (seconds).
    #[arg(long, env = "GPUQ_SAMPLE_EVERY_S", default_value_t = 5)]
    pub sample_every_s: u64,
    /// How long usage samples are kept (hours); longer usage ranges are refused.
    #[arg(long, env = "GPUQ_SAMPLE_RETENTION_H", default_value_t = 720)]
    pub sample_retention_h: u64,
    /// How often each job's VRAM on its cards is read and policed (milliseconds).
    #[arg(long, env = "GPUQ_VRAM_SAMPLE_MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(50..=600_000))]
    pub vram_sample_ms: u64,
    /// Consecutive readings above its commitment before a job gets a `vram_over_commitment` event.
    #[arg(long, env = "GPUQ_VRAM_OVERUSE_SAMPLES", default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=1000))]
    pub vram_overuse_samples: i32,
    /// A card with less free VRAM than this (MiB, NVML total − used) is short: under policy
    /// `vram_enforcement: stop` the job most over its commitment on it is stopped.
    #[arg(long, env = "GPUQ_VRAM_RESERVE_MIB", default_value_t = 512, value_parser = clap::value_parser!(i64).range(0..=1_048_576))]
    pub vram_reserve_mib: i64,
    /// Launch admitted jobs of this node in Docker (turn off for a scheduling-only process).
    #[arg(long, env = "GPUQ_RUNNER", default_value_t = true, action = clap::ArgAction::Set)]
    pub runner: bool,
    /// Docker socket (default: the local daemon's usual socket).
    #[arg(long, env = "GPUQ_DOCKER_SOCKET")]
    pub docker_socket: Option<String>,
    /// Uids (and gids) allocated to users who have no job uid yet, `FIRST-LAST`: each user's jobs
    /// run as their own uid, never as root. Keep it clear of the host's real accounts and
    /// subordinate ids; the default is above those of a typical host (accounts, `/etc/subuid`,
    /// systemd's container ranges, SSSD and FreeIPA directory ids) and below 2^31. Changing it
    /// moves no one: uids already given stay their users'.
    #[arg(
        long,
        env = "GPUQ_JOB_UID_RANGE",
        default_value = "2001000000-2099999999"
    )]
    pub job_uid_range: String,
    /// Size cap of one job's log file, in bytes (at least 4096). Past it the runner writes one
    /// line saying the output was cut and stops reading the job's output from Docker.
    #[arg(long, env = "GPUQ_LOG_MAX_BYTES", default_value_t = 64 * 1024 * 1024, value_parser = clap::value_parser!(u64).range(4096..))]
    pub log_max_bytes: u64,
    /// Job-log reads (whole logs and tails) this node serves at once; past it a read waits a few
    /// seconds, then gets 503 with `Retry-After`. One user has at most 4 in progress.
    #[arg(long, env = "GPUQ_LOG_READS", default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub log_reads: u64,
    /// Seconds between SIGTERM and SIGKILL when a job times out or is cancelled.
    #[arg(long, env = "GPUQ_STOP_GRACE_S", default_value_t = 10)]
    pub stop_grace_s: u64,
    /// Mark the session cookie `Secure` (set when served over HTTPS).
    #[arg(long, env = "GPUQ_SECURE_COOKIES", default_value_t = false)]
    pub secure_cookies: bool,
    /// Bearer token a Prometheus scrape of `/metrics` must send (`Authorization: Bearer …`); any
    /// other request gets 401. Without it `/metrics` is open (it carries no personal data).
    #[arg(long, env = "GPUQ_METRICS_TOKEN", hide_env_values = true)]
    pub metrics_token: Option<String>,
    /// Serve `/metrics` on this address only (e.g. a private interface) instead of on `--listen`.
    #[arg(long, env = "GPUQ_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// How often the figures `/metrics` takes from the database are re-read (milliseconds); a
    /// scrape itself never queries the database.
    #[arg(long, env = "GPUQ_METRICS_REFRESH_MS", default_value_t = 5000)]
    pub metrics_refresh_ms: u64,
    /// How often this node heartbeats in the database (seconds).
    #[arg(long, env = "GPUQ_HEARTBEAT_S", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub heartbeat_s: u64,
    /// A node without a heartbeat for this long (seconds, database time) is lost: its cards take no
    /// new work. Stored with the node, so every process judges it the same way.
    #[arg(long, env = "GPUQ_NODE_LOST_AFTER_S", default_value_t = 15, value_parser = clap::value_parser!(u32).range(1..=86_400))]
    pub node_lost_after_s: u32,
    /// The URL other hosts and operators reach this node at (default: `http://` and `--listen`,
    /// with this host's name in place of an unspecified address).
    #[arg(long, env = "GPUQ_ADVERTISE_URL")]
    pub advertise_url: Option<String>,
    /// Serve the web UI and the REST API. `false` makes an agent: a GPU host behind one UI host
    /// that runs jobs, its inventory and heartbeat, and answers only probes, `/metrics` and what
    /// other nodes ask of it (`/internal/v1/…`).
    #[arg(long, env = "GPUQ_UI", default_value_t = true, action = clap::ArgAction::Set)]
    pub ui: bool,
    /// The secret every node of one gpuq shares (at least 32 bytes; the same on each node), with
    /// which a node reads a job's log from the node that ran it. Without it each node reads only
    /// its own jobs' logs.
    #[arg(long, env = "GPUQ_CLUSTER_SECRET", hide_env_values = true)]
    pub cluster_secret: Option<String>,
    /// The NVML library to load for `--gpu-source nvml` (or `auto`): a path, or a name the dynamic
    /// loader searches. Default: the system's `libnvidia-ml.so.1`.
    #[arg(long, env = "GPUQ_NVML_LIB")]
    pub nvml_lib: Option<PathBuf>,
    /// Reverse proxies (CIDRs or addresses, comma-separated) whose `X-Forwarded-For` names the
    /// client: the sign-in throttle then counts each client apart instead of every user as the
    /// proxy. From any other peer the header is ignored.
    #[arg(long, env = "GPUQ_TRUSTED_PROXY", value_delimiter = ',', value_parser = parse_cidr)]
    pub trusted_proxy: Vec<ipnet::IpNet>,
    /// Serve interactive sessions (jobs with a `port`) on this listener of their own, a different
    /// origin from the UI's: `<sessions-url>/s/<job-id>/` (docs/sessions.md). Unset: sessions run
    /// but cannot be opened through this process.
    #[arg(long, env = "GPUQ_SESSIONS_LISTEN")]
    pub sessions_listen: Option<SocketAddr>,
    /// The public base URL of the sessions listener (default `http://<sessions-listen>`), when a
    /// reverse proxy stands in front of it.
    #[arg(long, env = "GPUQ_SESSIONS_URL", requires = "sessions_listen")]
    pub sessions_url: Option<String>,
    /// A wildcard domain whose hosts (`<job-id>.<domain>`) a reverse proxy sends to the sessions
    /// listener over HTTPS: each session then has an origin of its own,
    /// `https://<job-id>.<domain>/s/<job-id>/`.
    #[arg(long, env = "GPUQ_SESSIONS_DOMAIN", requires = "sessions_listen")]
    pub sessions_domain: Option<String>,
    /// A browser session ends this many hours after its sign-in, however active it is.
    #[arg(long, env = "GPUQ_SESSION_LIFETIME_H", default_value_t = 168, value_parser = clap::value_parser!(u32).range(1..=8760))]
    pub session_lifetime_h: u32,
    /// Job submissions (and resubmits) one user may make per minute, in a burst or spread out;
    /// `0` for no limit. Admins are not limited.
    #[arg(long, env = "GPUQ_SUBMIT_RATE_PER_MIN", default_value_t = 120)]
    pub submit_rate_per_min: u32,
    /// Submit previews one user may ask for per minute; `0` for no limit. Admins are not limited.
    #[arg(long, env = "GPUQ_PREVIEW_RATE_PER_MIN", default_value_t = 120)]
    pub preview_rate_per_min: u32,
    /// Seconds a client has to send a request's head (and an idle keep-alive connection stays
    /// open), and again to send its body.
    #[arg(long, env = "GPUQ_HTTP_READ_TIMEOUT_S", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub http_read_timeout_s: u64,
    /// Connections served at once; further ones wait until one closes.
    #[arg(long, env = "GPUQ_HTTP_MAX_CONNECTIONS", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub http_max_connections: u32,
    /// Notifications: the SMTP relay, the retries, the link in each message.
    #[command(flatten)]
    pub notify: NotifyArgs,
}

/// Flags of the notification delivery worker (`gpuq serve`).
#[derive(Debug, Clone, Args)]
pub struct NotifyArgs {
    /// The SMTP relay notification mails go through (its host name). Without it this node sends
    /// no mail (webhooks still go out); mails wait for a node that has one.
    #[arg(long, env = "GPUQ_SMTP_HOST")]
    pub smtp_host: Option<String>,
    /// The relay's port (587 for STARTTLS, 465 for TLS, 25 without).
    #[arg(long, env = "GPUQ_SMTP_PORT", default_value_t = 587)]
    pub smtp_port: u16,
    /// How the connection to the relay is protected: `starttls` (upgrade, required), `tls`
    /// (implicit TLS from the first byte) or `none` (plain text: only for a relay on this host).
    #[arg(long, env = "GPUQ_SMTP_TLS", default_value = "starttls", value_parser = ["none", "starttls", "tls"])]
    pub smtp_tls: String,
    /// The user name gpuq signs in to the relay with (none: no AUTH).
    #[arg(long, env = "GPUQ_SMTP_USERNAME")]
    pub smtp_username: Option<String>,
    /// The password it signs in with; set it through the environment (the env file), never on a
    /// command line others can read. Never logged or shown.
    #[arg(long, env = "GPUQ_SMTP_PASSWORD", hide_env_values = true)]
    pub smtp_password: Option<String>,
    /// A PEM file of certificate authorities to trust for the relay besides the public ones
    /// (a relay inside the company, its certificate signed by the company's own CA).
    #[arg(long, env = "GPUQ_SMTP_CA_FILE")]
    pub smtp_ca_file: Option<std::path::PathBuf>,
    /// The sender of notification mails, e.g. `gpuq <gpuq@example.org>`.
    #[arg(long, env = "GPUQ_SMTP_FROM")]
    pub smtp_from: Option<String>,
    /// The URL people open gpuq at, for the job link in each notification (default: the advertise
    /// URL).
    #[arg(long, env = "GPUQ_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// Wait before the first retry of a failed delivery (milliseconds); it doubles with each
    /// retry up to `--notify-retry-max-s`.
    #[arg(long, env = "GPUQ_NOTIFY_RETRY_FIRST_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub notify_retry_first_ms: u64,
    /// The longest wait between two attempts (seconds).
    #[arg(long, env = "GPUQ_NOTIFY_RETRY_MAX_S", default_value_t = 1800, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub notify_retry_max_s: u64,
    /// Attempts of one delivery before it ends `failed`.
    #[arg(long, env = "GPUQ_NOTIFY_ATTEMPTS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub notify_attempts: u32,
    /// How long a node that took a delivery holds it while sending (seconds): after a crash
    /// mid-send another node (or the restarted one) tries it again once this has passed.
    #[arg(long, env = "GPUQ_NOTIFY_LEASE_S", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub notify_lease_s: u64,
}

/// A `--trusted-proxy` entry: a CIDR (`10.0.0.0/8`) or one address (`127.0.0.1`, `::1`).
fn parse_cidr(text: &str) -> Result<ipnet::IpNet, String> {
    let text = text.trim();
    text.parse::<ipnet::IpNet>()
        .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| {
            format!("`{text}` is not a CIDR or an address (e.g. 10.0.0.0/8, 192.168.1.5, ::1/128)")
        })
}

/// Flags of `gpuq user add`.
#[derive(Debug, Args)]
pub struct UserAddArgs {
    /// Login name of the new user.
    pub name: String,
    /// Role: member, manager or admin.
    #[arg(long, default_value = "member")]
    pub role: String,
    /// Database location.
    #[command(flatten)]
    pub db: DbArgs,
}

fn default_node() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

impl ServeArgs {
    /// Checks what the flags alone can say is wrong, naming the flag; what needs the domain's own
    /// parsers (`--job-uid-range`, `--gpu-source`, `--cluster-secret`, the bootstrap password's
    /// policy) is checked where those are parsed, before anything starts.
    pub fn validate(&self) -> Result<(), String> {
        if self
            .metrics_token
            .as_deref()
            .is_some_and(|t| t.trim().is_empty())
        {
            return Err(
                "--metrics-token (GPUQ_METRICS_TOKEN) is empty: give a token, or unset it \
                        to leave /metrics open"
                    .to_owned(),
            );
        }
        if self.node.trim().is_empty() {
            return Err("--node (GPUQ_NODE) is empty: name this node".to_owned());
        }
        if self.db.db_max_connections == 0 {
            return Err(
                "--db-max-connections (GPUQ_DB_MAX_CONNECTIONS) is 0: gpuq needs at \
                        least one connection"
                    .to_owned(),
            );
        }
        Ok(())
    }

    /// `--advertise-url`, or one derived from `--listen`: an unspecified address (0.0.0.0, ::)
    /// becomes this host's name.
    pub fn advertise_url(&self) -> String {
        if let Some(url) = &self.advertise_url {
            return url.clone();
        }
        if self.listen.ip().is_unspecified() {
            format!("http://{}:{}", default_node(), self.listen.port())
        } else {
            format!("http://{}", self.listen)
        }
    }

    /// The GPU source asked for, and a deprecation warning when it was asked for by an old name.
    pub fn gpu_source(&self) -> (&str, Option<&'static str>) {
        match &self.gpus_deprecated {
            Some(old) => (
                old,
                Some("--gpus is deprecated: use --gpu-source (GPUQ_GPU_SOURCE)"),
            ),
            None => (&self.gpu_source, None),
        }
    }
}

/// Flags of `gpuq doctor`: those of `gpuq serve` (so it checks the set-up the server will run
/// with), and its own.
#[derive(Debug, Clone, Args)]
pub struct DoctorArgs {
    /// The server's flags, as the service passes them.
    #[command(flatten)]
    pub serve: ServeArgs,
    /// Print the checks as one JSON document instead of lines.
    #[arg(long)]
    pub json: bool,
    /// A local image for the fenced smoke container. On real cards it must contain `nvidia-smi`
    /// (a CUDA base image); on simulated cards any image with `sh` and `ls`. Without it the smoke
    /// check is skipped with a warning.
    #[arg(long, env = "GPUQ_DOCTOR_IMAGE")]
    pub smoke_image: Option<String>,
    /// The destinations jobs may reach, as `gpuq firewall apply` was given them.
    #[command(flatten)]
    pub egress: EgressArgs,
}

/// Destinations jobs on the job network may reach besides the internet (`gpuq firewall`, and
/// `gpuq doctor`, which checks the rules made with them).
#[derive(Debug, Clone, Args)]
pub struct EgressArgs {
    /// `CIDR[:PORT]`, comma-separated (e.g. `10.0.5.20/32:3128` for a proxy, `192.168.7.0/24`
    /// for a NAS).
    #[arg(
        long = "egress-allow",
        env = "GPUQ_EGRESS_ALLOW",
        value_delimiter = ','
    )]
    pub egress_allow: Vec<String>,
}

/// Flags of `gpuq firewall`.
#[derive(Debug, Clone, Args)]
pub struct FirewallArgs {
    /// `apply` (install the rules; creates the job network if missing), `check` (exit non-zero
    /// unless they are exactly in place) or `remove`.
    #[arg(value_enum)]
    pub action: FirewallAction,
    /// dockerd's unix socket (local default when unset).
    #[arg(long, env = "GPUQ_DOCKER_SOCKET")]
    pub docker_socket: Option<String>,
    /// Destinations jobs may reach besides the internet.
    #[command(flatten)]
    pub egress: EgressArgs,
}

/// What `gpuq firewall` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FirewallAction {
    /// Install the rules.
    Apply,
    /// Check that they are exactly in place.
    Check,
    /// Take them out.
    Remove,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Serve {
        #[command(flatten)]
        args: ServeArgs,
    }

    fn args(flags: &[&str]) -> ServeArgs {
        let mut argv = vec!["gpuq"];
        argv.extend_from_slice(flags);
        Serve::try_parse_from(argv).expect("flags parse").args
    }

    #[test]
    fn validate_names_the_flag_that_is_wrong() {
        assert_eq!(args(&["--node", "gpu1"]).validate(), Ok(()));
        for (flags, flag) in [
            (&["--metrics-token", " "][..], "--metrics-token"),
            (&["--node", ""][..], "--node"),
            (&["--db-max-connections", "0"][..], "--db-max-connections"),
        ] {
            let e = args(flags).validate().expect_err("refused");
            assert!(e.starts_with(flag), "{flags:?}: {e}");
        }
    }
}
